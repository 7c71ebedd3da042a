# grep: literal byte matching under a path, one JSON line per match (see pyscripts.build_grep).
import json,os,sys,time
a=json.loads(sys.argv[1])
root=a['p'];P=[s.encode('utf-8','surrogateescape') for s in a['q']];G=a['g'];mode=a['gm']
X=set(a['x']);cap=a['c'];end=time.monotonic()+a['t'];n=0
#: include confined.py
class Stop(Exception):pass
W=sys.stdout.write
def lines(f):
 head=f.read(65536)
 # a binary file: grep prints no line records for it
 if b'\0' in head[:8192]:return
 # a small file: one C-speed search skips most files whole
 if len(head)<65536:
  if not any(s in head for s in P):return
  parts=head.split(b'\n')
  if parts[-1]==b'':parts.pop()
  yield from parts;return
 f.seek(0);yield from f
def scan(path):
 global n
 try:
  with open(path,'rb') as f:
   for i,line in enumerate(lines(f),1):
    if any(s in line for s in P):
     W(json.dumps({'p':path,'l':i,'t':line.rstrip(b'\n').decode('utf-8','replace')})+'\n');n+=1
     if n>=cap:raise Stop
    if not i&4095 and time.monotonic()>end:raise Stop
 except OSError:pass
def files():
 if not os.path.isdir(root):yield root;return
 if mode=='path':
  import glob
  os.chdir(root);seen=set()
  for g in G:
   for rel in glob.glob(g,recursive=True):
    if rel in seen or X.intersection(rel.split('/')[:-1]):continue
    seen.add(rel)
    if os.path.isfile(rel) and not os.path.islink(rel) and confined(rel,a['r']):yield os.path.join(root,rel)
  return
 if mode=='base':import fnmatch
 for d,ds,fs in os.walk(root):
  ds[:]=sorted(x for x in ds if x not in X)
  for f in sorted(fs):
   if mode=='base' and not any(fnmatch.fnmatchcase(f,g) for g in G):continue
   fp=os.path.join(d,f)
   if not os.path.islink(fp):yield fp
try:
 if not confined(root,a['r']):W(json.dumps({'error':'invalid_path'})+'\n');sys.exit(0)
 if not os.path.exists(root):W(json.dumps({'error':'path_not_found'})+'\n');sys.exit(0)
 t=0
 try:
  for fp in (sorted(files()) if mode=='path' else files()):
   if time.monotonic()>end:raise Stop
   scan(fp)
 except Stop:t=1
 W(json.dumps({'done':1,'trunc':t})+'\n')
except PermissionError:W(json.dumps({'error':'permission_denied'})+'\n')
