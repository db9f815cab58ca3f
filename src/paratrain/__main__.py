from paratrain.cli.main import entry

entry()
