"""Runtime half of loopcoll: telemetry, EWMA, bottleneck-cut drift detector, schedule manager,
controller daemon, torch.distributed executor and hot-swap. Not yet implemented; torch stays an
optional extra and is imported lazily here once it is.
"""
