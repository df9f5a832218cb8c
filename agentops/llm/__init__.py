"""The LLM provider layer: one chat interface over Mistral (the ``mistralai`` SDK) and a
scripted offline model for installs with no key. See base.py."""
