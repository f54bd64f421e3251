"""Servers we start: the embedded simulated server (``simulated``) and a local llama.cpp
server (``llamacpp``). They import the models and pure code, never the runner."""
