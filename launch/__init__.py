"""handrail.launch."""
