"""Child processes of the crash-during-save test, forked from one zygote.

The zygote imports JAX, the trainer and the checkpoint code once; then, for every command the
test sends (with the child's end of a socket pair attached), it forks a child that talks to the
test over that socket. Forking is safe there: nothing in the zygote has run JAX, so it has no
runtime threads for a child to lose; each child starts JAX's runtime itself.

``train``: build a trainer and compile its step, say ``started <pid>``; once a line arrives (the
previous child is dead), resume from ``<dir>/latest`` if it exists, then train and save after
every episode until killed, saying ``ready`` once the loop runs. ``reference``: build one, then
train an uninterrupted run to the env step count the test sends and say its state's digest.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import TextIO

from jax._src import xla_bridge

from handrail.learners.checkpoint import write_checkpoint_dir
from handrail.learners.loop import Trainer

sys.path.insert(0, str(Path(__file__).parent))
from _save_setup import make_trainer, state_digest


def say(channel: TextIO, line: str) -> None:
    """One line to the test."""
    channel.write(line + "\n")
    channel.flush()


def compiled_trainer() -> Trainer:
    """A fresh trainer whose training step is already compiled (while the previous child
    trains): a throwaway trainer on the same agent compiled it, the steps being jitted with the
    agent static. The fresh one then resumes as a new process would, only without compiling."""
    trainer = make_trainer()
    make_trainer(trainer.sac).run(20)
    return trainer


def train(folder: Path, channel: TextIO) -> None:
    """The train-and-save loop the test kills."""
    trainer = compiled_trainer()
    say(channel, f"started {os.getpid()}")
    channel.readline()  # the test says when the previous child is dead: only then read its save
    if (folder / "latest").exists():
        trainer.load(folder / "latest")
    trainer.run(10)  # the loop runs before the test starts its random clock
    write_checkpoint_dir(folder / "latest", trainer.save_into)
    say(channel, "ready")
    while True:
        trainer.run(10)  # one 10-step episode
        write_checkpoint_dir(folder / "latest", trainer.save_into)


def reference(channel: TextIO) -> None:
    """The uninterrupted run's state digest at the env step count the test sends."""
    trainer = compiled_trainer()
    steps = int(channel.readline())
    while trainer.env_steps < steps:
        trainer.run(10)
    say(channel, f"{trainer.env_steps} {state_digest(trainer)}")


def serve(folder: Path, control: socket.socket) -> None:
    """Fork a child for every command until the test closes its end of ``control``."""
    assert not xla_bridge.backends_are_initialized(), "JAX's runtime runs: forking is unsafe"
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    while True:
        message, fds, _, _ = socket.recv_fds(control, 256, 1)
        if not message:
            return
        if os.fork() == 0:
            code = 0
            try:
                control.close()
                with socket.socket(fileno=fds[0]) as sock, sock.makefile("rw") as channel:
                    if message == b"train":
                        train(folder, channel)
                    else:
                        reference(channel)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                code = 1
            finally:
                os._exit(code)  # never back into the zygote's loop
        os.close(fds[0])  # the child's alone: the test sees its socket close when it dies


if __name__ == "__main__":
    serve(Path(sys.argv[1]), socket.socket(fileno=int(sys.argv[2])))
