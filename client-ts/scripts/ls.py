# ls: `python3 -S -c <this> <json {p, r}>`, one JSON line per entry, then {"done": 1}.
import json,os,sys
q=json.loads(sys.argv[1])
p=q['p']
#: include confined.py
def out(o):sys.stdout.write(json.dumps(o)+'\n')
try:
 if not confined(p,q['r']):out({'error':'invalid_path'});sys.exit(0)
 with os.scandir(p) as it:
  for e in it:
   d={'n':e.name,'d':e.is_dir(follow_symlinks=False)}
   try:s=e.stat(follow_symlinks=False);d['s']=s.st_size;d['m']=s.st_mtime
   except OSError:pass
   out(d)
 out({'done':1})
except FileNotFoundError:out({'error':'path_not_found'})
except NotADirectoryError:out({'error':'not_a_directory'})
except PermissionError:out({'error':'permission_denied'})
