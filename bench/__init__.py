"""Every benchmark behind ``adloader bench NAME``: ``live`` (real jobs under real daemons and
without one), ``data`` (the data path: caches, locality, storage), ``ops`` (the control plane
at scale, the install, the soak) and ``sim`` (the simulator's experiments and the declared
mixes). Each prints ratios against a baseline measured in the same run."""
