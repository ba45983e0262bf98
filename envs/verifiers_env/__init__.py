"""verifiers (0.4.0) environment packages as envs: `env=verifiers env.kwargs.id=MODULE`."""
