from npukit.cli import main

raise SystemExit(main())
