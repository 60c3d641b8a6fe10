"""``python -m ray_pd_eks``: the operations tool, the same as ``ray-pd-eks`` (see
``ray_pd_eks.console``)."""

import sys

try:
    from ray_pd_eks.console import run
except KeyboardInterrupt:  # Ctrl-C while the tool starts
    sys.stderr.write("interrupted\n")
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(run())
