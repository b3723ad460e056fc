"""AllToAll by column generation on a maximum-concurrent-flow LP, warm-started, with deep-dive rounding.

This package will hold the synthesizer of issue 4.
"""
