"""Child process of the crash-during-save test: once a line arrives on stdin (the previous
child is dead), resume from ``<dir>/latest`` if it exists, then train and save after every
episode until killed. Prints ``started`` once built, ``ready`` once the loop runs."""

from __future__ import annotations

import sys
from pathlib import Path

from handrail.learners.checkpoint import write_checkpoint_dir

sys.path.insert(0, str(Path(__file__).parent))
from _save_setup import make_trainer

folder = Path(sys.argv[1])
trainer = make_trainer()
print("started", flush=True)
sys.stdin.readline()  # the parent says when the previous child is dead: only then read its save
if (folder / "latest").exists():
    trainer.load(folder / "latest")
trainer.run(10)  # compile before the parent starts its random clock
write_checkpoint_dir(folder / "latest", trainer.save_into)
print("ready", flush=True)
while True:
    trainer.run(10)  # one 10-step episode
    write_checkpoint_dir(folder / "latest", trainer.save_into)
