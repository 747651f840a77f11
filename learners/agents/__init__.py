"""The learning algorithms: networks, losses and update steps of SAC/RLPD, residual RL and
behaviour cloning."""
