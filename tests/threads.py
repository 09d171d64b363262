"""Running test work on several threads."""
import threading


def run_in_threads(targets, timeout_s=120):
    """Run each callable in its own thread, all at once; re-raise the first exception any of
    them raised (AssertionError when one has not finished after timeout_s)."""
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported in the calling thread
            errors.append(exc)
    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
        assert not t.is_alive(), "a thread did not finish"
    if errors:
        raise errors[0]
