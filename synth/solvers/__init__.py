"""LP and max-flow solver backends (HiGHS, OR-Tools) behind one small interface."""
