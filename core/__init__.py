"""llmchat's core: the layers from the UI contract (api/) down to the server (serve/); core/README.md says
what each may import and follows one chat turn through the files."""
