"""OpenEnv interop: `envs.openenv.env.OpenEnvEnv` trains on any OpenEnv server (env=openenv)."""
