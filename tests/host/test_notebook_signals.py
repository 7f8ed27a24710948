"""run-cluster notebook's SIGTERM and SIGHUP (cluster_train/host/interactive/notebook.py): one that comes while its
job is being queued is held until the session exists, so that the job is cancelled and not left running."""
import os
import signal
import time

import pytest

from cluster_train.host.interactive import notebook


def test_a_sigterm_while_the_notebook_is_queued_is_raised_once_its_session_can_cancel_the_job(monkeypatch):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        stops = notebook.Stops()

        def queue(sub, said):  # the scheduler took the job; the signal comes before the session is returned
            os.kill(os.getpid(), signal.SIGTERM)
            return "session of job 41"

        monkeypatch.setattr(notebook.Session, "queue", queue)
        assert notebook.queued(None, stops) == "session of job 41"  # held: the caller has its session
        with pytest.raises(notebook.Stopped, match="SIGTERM"):
            stops.release()  # inside main's try, whose finally cancels the job
        with pytest.raises(notebook.Stopped, match="SIGHUP"):
            os.kill(os.getpid(), signal.SIGHUP)  # once the session exists: raised at once
            time.sleep(1)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
