from paratrain.cli.main import main

raise SystemExit(main())
