"""What runs inside a training job: the application master and the elastic loader."""

from .attach import attach
from .master import JobCancelled, JobMaster

__all__ = ["JobCancelled", "JobMaster", "attach"]
