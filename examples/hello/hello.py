"""A tiny job: reads its config from THESEUS_CONFIG and prints a few training-like steps."""
import argparse
import json
import os
import platform
import time

parser = argparse.ArgumentParser()
parser.add_argument("--greeting", default="hello")
args = parser.parse_args()

with open(os.environ["THESEUS_CONFIG"]) as f:
    config = json.load(f)

print(f"{args.greeting} (run {os.environ['THESEUS_RUN_ID']} on {platform.node()})", flush=True)
print(f"process {os.environ['THESEUS_PROCESS_ID']} of {os.environ['THESEUS_NUM_PROCESSES']}, "
      f"color={os.environ.get('HELLO_COLOR')}", flush=True)
loss = 1.0
for step in range(int(config["steps"])):
    loss *= 1.0 - float(config["learning_rate"]) * 100
    print(f"step {step}: loss={loss:.4f}", flush=True)
    time.sleep(0.2)
print("done", flush=True)
