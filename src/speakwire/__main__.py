import sys

from speakwire.cli.main import main

sys.exit(main())
