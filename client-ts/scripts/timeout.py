# The watchdog where the image has no usable `timeout`: a new session killed as a group.
import os,subprocess as s,sys
p=s.Popen(["sh","-c",sys.argv[2]],start_new_session=True)
try:r=p.wait(float(sys.argv[1]))
except s.TimeoutExpired:os.killpg(p.pid,9);p.wait();r=124
sys.exit(r if r>=0 else 128-r)
