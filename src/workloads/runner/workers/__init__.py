"""Worker processes: a run's sessions spread over processes (``--workers N``) or Ray actors
(``--ray ADDRESS``). The run's lifetime (cells, repetitions, sessions) lives one folder up
and never imports this one; :mod:`workloads.runner.run` picks the players.

    pool.py        the coordinator's side: WorkerPool, WorkerPlayers, auto_workers
    worker.py      one worker process (``python -m workloads.runner.workers.worker``)
    channel.py     coordinator <-> worker: a JSON object per line over TCP, token
    ray_actors.py  the workers as Ray actors (the ray extra; imported only for --ray)
"""
