"""The only code that talks to a Hub (through huggingface_hub's session), and the wire protocol servers speak."""

__all__: list[str] = []
