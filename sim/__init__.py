"""handrail.sim."""
