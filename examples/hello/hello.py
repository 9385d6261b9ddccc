"""Hello, Primus: print who this trainer is and the cluster it belongs to."""

import json
import os

tf_config = json.loads(os.environ["TF_CONFIG"])
print(f"hello from {os.environ['PRIMUS_ROLE']}-{os.environ['PRIMUS_INDEX']} "
      f"(rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}, "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, "
      f"ports {os.environ['PRIMUS_PORTS']})")
print("TF_CONFIG:", json.dumps(tf_config, sort_keys=True))
