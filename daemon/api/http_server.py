"""The daemon's uvicorn, ticking once a second instead of ten times.

uvicorn's own ``Server.main_loop`` wakes every 0.1 s to ask whether it should exit and, every
tenth tick, to renew the ``date`` header. On an idle daemon those wake-ups were half its CPU
(3.3-3.7 against 1.7-2.0 ms a second: docs/benchmarks.md, "Overhead, the
fourth cut"). Here the loop ticks once a second — the header is a second's anyway — and is
woken at once by what ends it: a signal (``handle_exit``) or ``stop()`` from another thread,
so a shutdown waits no longer than before.

uvicorn is imported when the class is first asked for (``server_class``): the daemon's
packages only, never the job side's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

TICK_S = 1.0  # uvicorn's: 0.1


@functools.cache
def server_class():
    """``uvicorn.Server`` with a one-second tick, ``on_started`` and a thread-safe ``stop``."""
    import uvicorn

    class Server(uvicorn.Server):
        on_started = None  # called once it serves (the daemon tells systemd)
        _loop: asyncio.AbstractEventLoop | None = None
        _woken: asyncio.Event | None = None

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started and self.on_started is not None:
                self.on_started()

        async def main_loop(self) -> None:
            self._woken, self._loop = asyncio.Event(), asyncio.get_running_loop()
            counter = 0  # uvicorn renews the date header when counter % 10 == 0
            while not await self.on_tick(counter):
                counter = (counter + 10) % 864000
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), TICK_S)
                self._woken.clear()

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            self._wake()

        def stop(self) -> None:
            """End the server from any thread: it notices at once, not at its next tick."""
            self.should_exit = True
            self._wake()

        def _wake(self) -> None:
            loop, woken = self._loop, self._woken
            if loop is not None and woken is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nothing waits
                    loop.call_soon_threadsafe(woken.set)

    return Server
