"""A small job queue with retries, written as a perplexity fixture for sparrow's engine tests."""

import heapq
import time
from dataclasses import dataclass, field


@dataclass(order=True)
class Job:
    priority: int
    name: str = field(compare=False)
    attempts: int = field(default=0, compare=False)
    max_attempts: int = field(default=3, compare=False)

    def should_retry(self):
        return self.attempts < self.max_attempts


class JobQueue:
    def __init__(self, clock=time.monotonic):
        self._heap = []
        self._clock = clock
        self._done = []
        self._failed = []

    def __len__(self):
        return len(self._heap)

    def push(self, job):
        heapq.heappush(self._heap, job)

    def pop(self):
        if not self._heap:
            raise IndexError("pop from an empty queue")
        return heapq.heappop(self._heap)

    def run(self, handler):
        while self._heap:
            job = self.pop()
            job.attempts += 1
            try:
                handler(job)
            except Exception as exc:  # noqa: BLE001
                if job.should_retry():
                    self.push(job)
                else:
                    self._failed.append((job, exc))
            else:
                self._done.append(job)
        return self._done, self._failed


def parse_line(line):
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    name, _, priority = line.partition(",")
    return Job(priority=int(priority or 0), name=name.strip())


def load_jobs(path):
    jobs = []
    with open(path, "r", encoding="utf-8") as f:
        for line in f:
            job = parse_line(line)
            if job is not None:
                jobs.append(job)
    return jobs


def summarize(done, failed):
    lines = []
    for job in done:
        lines.append(f"ok     {job.name} after {job.attempts} attempt(s)")
    for job, exc in failed:
        lines.append(f"failed {job.name}: {exc!r}")
    return "\n".join(lines)


class RateLimiter:
    def __init__(self, rate, per=1.0, clock=time.monotonic):
        self.rate = rate
        self.per = per
        self.clock = clock
        self.allowance = rate
        self.last = clock()

    def acquire(self):
        now = self.clock()
        elapsed = now - self.last
        self.last = now
        self.allowance = min(self.rate, self.allowance + elapsed * self.rate / self.per)
        if self.allowance < 1.0:
            return False
        self.allowance -= 1.0
        return True


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="Run jobs from a file.")
    parser.add_argument("path", help="one job per line: name,priority")
    parser.add_argument("--rate", type=float, default=10.0)
    args = parser.parse_args(argv)

    queue = JobQueue()
    for job in load_jobs(args.path):
        queue.push(job)
    limiter = RateLimiter(args.rate)

    def handler(job):
        while not limiter.acquire():
            time.sleep(0.01)
        if job.name.endswith("!"):
            raise RuntimeError("job asked to fail")

    done, failed = queue.run(handler)
    print(summarize(done, failed))
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
