"""npukit.models: PyTorch models and the ML methods (PsumQuant, OmniMoE, CacheEdit); may import npukit.sim."""
