"""What a node is like: device profiles (``device_profile``: eq. 6's step times, L(D), the
bundled ``profiles/``), the contention surface they may carry (``loading_surface``) and noisy
samples drawn from one (``synth``). The simulator runs on a profile as its truth; the daemon
fits its prior TPM from one, so neither imports the other for it. Not pure: profiles are
read from and written to files, and ``synth`` reads the model zoo's features."""
