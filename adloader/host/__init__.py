"""The OS facts both sides need (the daemon and the job): the only I/O inside ``adloader/``
outside its CLI. Small functions over ``/proc``, ``/sys`` and the file system."""
