import sys

from voxserve.cli.main import main

sys.exit(main())
