"""Public configuration facts of real models (JSON), each with its source; read by npukit.models."""
