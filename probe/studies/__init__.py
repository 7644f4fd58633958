"""Studies built on the Runner: the sampling check, analyses of finished runs, the representation study."""
