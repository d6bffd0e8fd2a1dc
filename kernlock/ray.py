"""Ray: ``kernlock.ray.runtime_env()`` for ``ray.init`` and ``ray job submit``, and the hooks Ray calls in the
driver and in each worker (docs/ray.md; the code is :mod:`kernlock.runtime.ray_jobs`)."""

from kernlock.runtime.ray_jobs import runtime_env, runtime_env_hook, setup_worker

__all__ = ["runtime_env", "runtime_env_hook", "setup_worker"]
