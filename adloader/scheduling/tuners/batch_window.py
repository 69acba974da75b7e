"""A window of a training loop's batches: its rate and the fraction of it spent waiting on
the loader, once ``size`` batches are in (what a per-job tuner reads)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BatchWindow:
    size: int
    _batches: int = field(init=False, default=0)
    _samples: int = field(init=False, default=0)
    _wait: float = field(init=False, default=0.0)
    _time: float = field(init=False, default=0.0)

    def add(self, samples: int, wait_s: float, step_s: float) -> tuple[float, float] | None:
        """One batch: ``samples`` in it, ``wait_s`` blocked on the loader, ``step_s`` the rest
        of the iteration. Once the window is full: (samples/s, waited fraction), and a new
        window starts; None before."""
        self._batches += 1
        self._samples += samples
        self._wait += max(wait_s, 0.0)
        self._time += max(wait_s, 0.0) + max(step_s, 0.0)
        if self._batches < self.size:
            return None
        return self.close()

    @property
    def batches(self) -> int:
        """The batches in the window so far."""
        return self._batches

    def peek(self) -> tuple[float, float]:
        """The window so far (samples/s, waited fraction), left open."""
        return self._samples / max(self._time, 1e-9), self._wait / max(self._time, 1e-9)

    def close(self) -> tuple[float, float]:
        """The window so far, as ``peek``; a new window starts."""
        out = self.peek()
        self._batches = self._samples = 0
        self._wait = self._time = 0.0
        return out
