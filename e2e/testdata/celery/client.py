"""Sends tasks and reads their outcome from Celery's result backend.

  client.py send QUEUE TASK [COUNT [SECONDS]]  one task id per line
                                         (SECONDS: the task's seconds argument)
  client.py states ID...                 one JSON object: id -> [state, exc_type]
"""
import json
import os
import sys

from celery.result import AsyncResult

from tasks import app

# On AMQP, each publish waits for RabbitMQ's confirm: this process exits
# right after its last send_task, without closing its connection, and
# RabbitMQ drops what the channel of a connection that died had not routed
# yet. A fresh-clone CI run (docs/results/ci-runs.md, seventh stop) lost
# the last of two tasks sent that way ("client unexpectedly closed TCP
# connection" 90 ms after it connected; the worker never received it).
if os.environ['BROKER'].startswith('amqp'):
    app.conf.broker_transport_options = {**(app.conf.broker_transport_options or {}), 'confirm_publish': True}

# This sender is the test's, not the user's: give it time to connect. Kombu
# gives a publish's connection broker_connection_timeout (Celery's default 4 s)
# in all, retries included, and RabbitMQ on a loaded 2-core machine can take
# longer than that to answer the AMQP handshake: a brand-new machine's CI run
# (docs/results/ci-runs.md, eleventh stop; load average 45, RabbitMQ 68 s to
# listen) failed its send with "TimeoutError: timed out" in amqp's
# connect. The workers are left with Celery's defaults, as a user's are.
app.conf.broker_connection_timeout = 60


def main():
    cmd = sys.argv[1]
    if cmd == 'send':
        queue, task = sys.argv[2], sys.argv[3]
        count = int(sys.argv[4]) if len(sys.argv) > 4 else 1
        kwargs = {'seconds': float(sys.argv[5])} if len(sys.argv) > 5 else {}
        for _ in range(count):
            print(app.send_task('tasks.' + task, queue=queue, kwargs=kwargs).id, flush=True)
    elif cmd == 'states':
        out = {}
        for tid in sys.argv[2:]:
            r = AsyncResult(tid, app=app)
            exc = ''
            if r.state == 'FAILURE':
                exc = type(r.result).__name__ if isinstance(r.result, BaseException) else str(r.result)
            out[tid] = [r.state, exc]
        print(json.dumps(out))
    else:
        sys.exit('unknown command ' + cmd)


if __name__ == '__main__':
    main()
