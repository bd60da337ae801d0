"""Settings split in base / local / production / test, all read from environment variables."""
