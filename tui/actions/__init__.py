"""The app's actions: chat operations, cache views, model switch, cache check, editor compose."""
