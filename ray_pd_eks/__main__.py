"""``python -m ray_pd_eks``: the operations tool (see ``ray_pd_eks.cli``)."""

import sys

from ray_pd_eks.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
