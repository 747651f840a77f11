"""The application layer between the commands and the libraries: task presets and run settings
(with the layer that set each value), env construction, the human in the loop, base policies,
demonstrations for a run."""
