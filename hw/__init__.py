"""handrail.hw."""
