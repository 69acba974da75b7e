"""What runs inside a training job: the application master and the elastic loader."""

from .master import JobMaster, attach

__all__ = ["JobMaster", "attach"]
