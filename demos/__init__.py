"""handrail.demos."""
