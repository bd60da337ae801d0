"""System metrics of a training or eval process: device use and memory, as W&B records them.

Every step (and every evaluation) reports, as metrics of its run:

- system/cpu_percent: this process's CPU time over the phase's wall time (100 = one core busy);
- system/memory_rss_mb: the process's resident memory at the end of the phase;
- on CUDA: system/gpu_memory_allocated_mb (tensors alive now), system/gpu_memory_peak_mb
  (the most allocated at once during the phase), system/gpu_memory_reserved_mb (what
  PyTorch's caching allocator holds), and system/gpu_utilization_percent, the mean of NVML's
  utilisation sampled every half second during the phase (absent when NVML is not installed:
  `pip install nvidia-ml-py`).

A phase is whatever the caller brackets with `start()` and `sample()`: a GRPO or SFT step,
an evaluation. Reading these costs microseconds, and the sampler thread sleeps between reads.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from typing import Any

import torch

GPU_SAMPLE_SECONDS = 0.5


def _process() -> Any:
    """psutil's handle on this process, or None where psutil is not installed."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process(os.getpid())


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def resident_memory_mb(process: Any = None) -> float:
    """Resident memory now (psutil), else the peak so far (getrusage; kilobytes on Linux)."""
    if process is not None:
        return process.memory_info().rss / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def gpu_utilization(device: torch.device) -> float | None:
    """NVML's utilisation of `device` in percent over its last sample period; None without NVML."""
    try:
        return float(torch.cuda.utilization(device))
    except Exception:  # no pynvml / nvidia-ml-py, or NVML cannot see the device
        return None


class _UtilizationSampler:
    """Samples GPU utilisation on a daemon thread until stopped; the mean of what it read."""

    def __init__(self, device: torch.device, interval: float) -> None:
        self.device = device
        self.interval = interval
        self.values: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-utilization", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            value = gpu_utilization(self.device)
            if value is None:
                return
            self.values.append(value)
            if self._stop.wait(self.interval):
                return

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join(timeout=self.interval * 4)
        return sum(self.values) / len(self.values) if self.values else None


class SystemMonitor:
    """Brackets one phase at a time: `start()`, the work, then `sample()` for its metrics."""

    def __init__(self, device: str | torch.device, *, gpu_sample_seconds: float = GPU_SAMPLE_SECONDS) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.gpu_sample_seconds = gpu_sample_seconds
        self.process = _process()
        self._wall = time.perf_counter()
        self._cpu = _cpu_seconds()
        self._sampler: _UtilizationSampler | None = None

    def start(self) -> None:
        """Begin a phase: zero the peak-memory counter, note the clocks, start sampling the GPU."""
        self._wall, self._cpu = time.perf_counter(), _cpu_seconds()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            if self._sampler is not None:
                self._sampler.stop()
            self._sampler = _UtilizationSampler(self.device, self.gpu_sample_seconds)

    def sample(self) -> dict[str, float]:
        """The phase's metrics since `start()` (or since the monitor was made)."""
        wall = max(time.perf_counter() - self._wall, 1e-9)
        metrics = {
            "system/cpu_percent": 100.0 * (_cpu_seconds() - self._cpu) / wall,
            "system/memory_rss_mb": resident_memory_mb(self.process),
        }
        if self.cuda:
            metrics.update(self._gpu_metrics())
        return metrics

    def _gpu_metrics(self) -> dict[str, float]:
        metrics = {
            "system/gpu_memory_allocated_mb": torch.cuda.memory_allocated(self.device) / 2**20,
            "system/gpu_memory_peak_mb": torch.cuda.max_memory_allocated(self.device) / 2**20,
            "system/gpu_memory_reserved_mb": torch.cuda.memory_reserved(self.device) / 2**20,
        }
        if self._sampler is not None:
            utilization = self._sampler.stop()
            self._sampler = None
            if utilization is not None:
                metrics["system/gpu_utilization_percent"] = utilization
        return metrics
