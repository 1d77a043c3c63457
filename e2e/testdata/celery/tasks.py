"""The Celery app of e2e/preset_celery_test.go: tasks that succeed, raise,
exit their pool child, are SIGKILLed, hit the hard and the soft time limit,
block the worker's main process and leak in it. The workers run
`python3 -m celery -A tasks worker -E ...`: nothing else is added to them.
BROKER and BACKEND (the result backend) come from the environment."""
import os
import signal
import time

from celery import Celery
from celery.signals import task_received

app = Celery('wwtasks', broker=os.environ['BROKER'], backend=os.environ.get('BACKEND'))
app.conf.result_extended = True
if os.environ.get('VISIBILITY_TIMEOUT'):
    # The Redis transport re-queues a message left unacked this long (a
    # task with acks_late still running included) at a worker's start and
    # every 100 s: TestPresetCeleryDuplicate's duplicate execution.
    app.conf.broker_transport_options = {'visibility_timeout': float(os.environ['VISIBILITY_TIMEOUT'])}


@app.task
def ok(seconds=0.2):
    time.sleep(seconds)
    return 'ok'


@app.task
def boom():
    raise ValueError('boom')


@app.task
def exit_child():
    os._exit(1)


@app.task
def sigkill_self():
    # What the kernel's OOM killer does to a pool child.
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(time_limit=3)
def hard_limit():
    time.sleep(60)


@app.task(soft_time_limit=1, time_limit=30)
def soft_limit():
    time.sleep(10)


@app.task
def stop_parent():
    # Blocks the worker's main process (a deadlock, a stuck C call): its
    # children keep working; it sends no heartbeat, no event, takes nothing.
    os.kill(os.getppid(), signal.SIGSTOP)
    return 'stopped'


@app.task
def long(seconds=15):
    time.sleep(seconds)
    return 'long'


@app.task(acks_late=True)
def long_late(seconds=20):
    # Acknowledged when it ends: its message stays in the Redis transport's
    # unacked hash while it runs.
    time.sleep(seconds)
    return 'long'


_leak = []


@task_received.connect
def _on_received(request=None, **_):
    # Runs in the worker's main process: a leak there (16 MiB a task).
    if request is not None and request.name == 'tasks.leak_main':
        b = bytearray(16 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        _leak.append(b)


@app.task
def leak_main():
    return 'leaked'


_held = []


@app.task
def grow(mb=64):
    # Keeps mb MiB in the pool child: past worker_max_memory_per_child the
    # child is replaced after the task (no event says so).
    b = bytearray(mb << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    _held.append(b)
    return mb
