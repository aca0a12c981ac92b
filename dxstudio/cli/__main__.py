import sys

from dxstudio.cli.main import main

sys.exit(main())
