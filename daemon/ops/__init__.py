"""Running the daemon: its settings and token files (``settings``), its log (``logs``),
systemd's notifications (``systemd``) and the claim on its state directory
(``state_lock``)."""
