"""Examples of user code: tasks written outside :mod:`handrail.sim.tasks`.

Each module here is what a user would write for an arm task of their own: a Gymnasium env with
its own observation keys and its own success key in ``info``, registered with gymnasium when the
module is imported, and a scripted demonstrator that records into a handrail episode store. Such
a task is trained with ``handrail train --task module:Id`` (e.g.
``handrail train --task handrail.examples.lift_can:LiftCan-v0 --success-key can_lifted``), which
imports the module before ``gymnasium.make``. Nothing in the product imports this package.
"""
