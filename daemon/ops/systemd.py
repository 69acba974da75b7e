"""systemd's service notifications (``Type=notify``, ``WatchdogSec=``), over the datagram
socket systemd names in ``NOTIFY_SOCKET`` — the protocol of ``sd_notify(3)``, in a few lines
of ``socket``. Outside systemd (no ``NOTIFY_SOCKET``) every call does nothing.

``Notifier.from_environment()`` takes the variables out of the environment (as
``sd_notify``'s ``unset_environment`` does), so the jobs the daemon launches never inherit
them. ``ready()`` says READY=1 once the daemon serves; ``watchdog(alive)`` then says
WATCHDOG=1 every half ``WATCHDOG_USEC`` for as long as ``alive()`` holds — a daemon whose
control loop is stuck stops saying it, and systemd restarts it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

log = logging.getLogger("adloader.daemon")
VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    def __init__(self, address: str | None, watchdog_usec: int | None = None):
        if address and address.startswith("@"):  # an abstract socket
            address = "\0" + address[1:]
        self.address = address if address and address[0] in "/\0" else None
        self.interval_s = watchdog_usec / 2e6 if watchdog_usec else None
        self._stop = threading.Event()

    @classmethod
    def from_environment(cls, env: dict | None = None) -> Notifier:
        env = os.environ if env is None else env
        values = {name: env.pop(name, None) for name in VARIABLES}
        usec, pid = values["WATCHDOG_USEC"], values["WATCHDOG_PID"]
        try:
            watchdog = int(usec) if usec and (not pid or int(pid) == os.getpid()) else None
        except ValueError:
            watchdog = None
        return cls(values["NOTIFY_SOCKET"], watchdog if watchdog and watchdog > 0 else None)

    def notify(self, state: str) -> bool:
        """Send ``state`` (``READY=1``, ``STATUS=...``); False outside systemd or when the
        socket cannot be reached (said once in the log: systemd will act on its silence)."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(self.address)
                s.sendall(state.encode())
        except OSError as exc:
            log.warning("cannot notify systemd (%s): %s", state.split("\n")[0], exc)
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def stopping(self) -> bool:
        self._stop.set()
        return self.notify("STOPPING=1")

    def watchdog(self, alive: Callable[[float], bool]) -> threading.Thread | None:
        """A thread that says WATCHDOG=1 every half interval while ``alive(timeout_s)``
        holds (given a quarter of the interval to answer); None when systemd asked for no
        watchdog."""
        if self.address is None or self.interval_s is None:
            return None
        interval = self.interval_s

        def beat() -> None:
            while not self._stop.is_set():
                if alive(interval / 2):
                    self.notify("WATCHDOG=1")
                else:
                    log.error("the control loop did not answer within %.1f s: no watchdog "
                              "ping (systemd restarts a daemon that stays silent)", interval)
                self._stop.wait(interval)

        thread = threading.Thread(target=beat, name="adloader-watchdog", daemon=True)
        thread.start()
        return thread
