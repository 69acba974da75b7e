"""The benchmarks behind ``adloader bench NAME`` that run real parts: live jobs under real
daemons, the control plane at scale, live resizes, caches, locality and storage. Each prints
ratios against a baseline measured in the same run; tests never import them."""
