"""The scripted OpenAI-compatible test server, by part: settings, stats, app, handle
(`podium.testing.scripted_server` documents it and is its command line)."""
