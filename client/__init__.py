"""What runs inside a training job: the application master and the elastic loader."""
