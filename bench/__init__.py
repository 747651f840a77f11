"""The benchmarks (``handrail bench ...``): tooling that measures the product; nothing in the
product imports it."""
