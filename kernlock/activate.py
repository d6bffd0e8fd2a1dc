"""``import kernlock.activate`` as the first line of a program: every Hub kernel load honours kernels.lock."""

from kernlock import runtime

runtime.activate()
