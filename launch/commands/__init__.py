"""One thin module per ``handrail`` command: parse the options, call the application layer, print."""
