"""The prefix cache's disk tier: entry format, folder, store, tier."""
