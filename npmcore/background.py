"""Iterators computed ahead on a background thread (:func:`in_background`): a bounded queue between the thread and
the consumer, the order kept, an error of the thread raised in the consumer, the thread stopped when the consumer
closes the generator. Host-side work then overlaps the consumer's (training masks its batches there).

Imports no module of npmcore.
"""

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

Item = TypeVar("Item")


def in_background(items: Iterator[Item], depth: int) -> Iterator[Item]:
    """``items``, computed up to ``depth`` ahead on a background thread, in the same order; an
    exception raised there is raised here. Closing the generator stops the thread."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple) -> bool:  # False once the consumer is gone
        while not stop.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as error:  # noqa: BLE001 -- handed to the consumer, raised there
            put((None, error))

    thread = threading.Thread(target=produce, name="in-background", daemon=True)
    thread.start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            yield item
    finally:
        stop.set()
        thread.join()
