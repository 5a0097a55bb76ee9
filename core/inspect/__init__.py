"""Looking inside a running engine: block map, engine facts, cache check, bandwidth probe."""
